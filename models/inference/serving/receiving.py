"""Reading a request's upload: counted as it arrives, and the client watched while its answer is made.

    counting(request, most)                 the request, refused (413) past `most` body bytes, chunked or not
    form_upload(request, max_bytes, texts)   (file, client name, reference or None) of a multipart form
    raw_upload(request, max_bytes)          (body, X-Filename, None) of a request whose body is the file
    unless_disconnected(request, answer)    `answer`'s result, or ClientDisconnect as soon as the client goes
"""
from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Request
from starlette.requests import ClientDisconnect

from models.inference.serving.uploads import BadRequest, shown

# The files a form may hold: the input, and BicycleGAN's reference image of the output domain.
FORM_FILES = ("file", "reference")


async def unless_disconnected(request: Request, answer: Any) -> Any:
    """What the awaitable `answer` gives, or ClientDisconnect as soon as the client goes (its request then
    leaves the batcher's queue: nobody is translated for a client that is gone)."""
    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    answering, watching = asyncio.ensure_future(answer), asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({answering, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
    if answering not in done:
        answering.cancel()
        raise ClientDisconnect()
    return answering.result()


def counting(request: Request, most: int) -> Request:
    """`request` whose body, however it is sent (chunked too), is refused past `most` bytes as it arrives."""
    received = 0

    async def receive() -> dict:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > most:
                raise BadRequest(413, f"the request is more than the {most} bytes this server takes "
                                      f"(scripts/serve.py --max_upload_mb)")
        return message

    return Request(request.scope, receive)


async def form_upload(request: Request, max_bytes: int,
                       texts: list[tuple[str, str]]) -> tuple[bytes, str | None, bytes | None]:
    """(file, its client name, reference file or None) of a multipart form; its text fields (name, value)
    are appended to `texts` for the caller to check. A file under any other name than FORM_FILES, or one of
    them twice, is refused (400) naming it: nothing a client sends is dropped in silence."""
    try:
        form = await request.form(max_files=2, max_fields=16, max_part_size=max_bytes)
    except BadRequest:
        raise
    except Exception as err:  # starlette's parser errors: a malformed or oversized form
        raise BadRequest(400, f"the form cannot be read ({' '.join(str(err).split())})") from None
    files = [name for name, value in form.multi_items() if not isinstance(value, str)]
    for name in files:
        if name not in FORM_FILES:
            raise BadRequest(400, f"the form's file field {shown(name)} is not one /translate reads: send the image "
                                  f"as 'file' (and BicycleGAN's reference image as 'reference')")
        if files.count(name) > 1:
            raise BadRequest(400, f"the form holds {files.count(name)} files named '{name}'; send one")
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise BadRequest(400, "the form has no file field 'file': send the image as 'file'")
    reference = form.get("reference")
    reference_body = await reference.read() if reference is not None and not isinstance(reference, str) else None
    texts.extend((key, value) for key, value in form.multi_items() if isinstance(value, str))
    return await upload.read(), upload.filename, reference_body


async def raw_upload(request: Request, max_bytes: int) -> tuple[bytes, str | None, None]:
    """(body, the client's name from X-Filename, no reference) of a request whose body is the file."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise BadRequest(413, f"the upload is more than this server's {max_bytes} bytes "
                                  f"(scripts/serve.py --max_upload_mb)")
        chunks.append(chunk)
    return b"".join(chunks), request.headers.get("x-filename"), None
