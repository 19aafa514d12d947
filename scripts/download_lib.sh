# Shared by the download_*.sh scripts (sourced, not run): fetch a file, verify it, explain failures.
#
# IMG2IMG_DOWNLOAD_BASE replaces the reference's server (http://efrosgans.eecs.berkeley.edu), e.g.
# for a mirror or a local copy: the paths under it stay the same (cyclegan/datasets/NAME.zip,
# pix2pix/datasets/NAME.tar.gz, cyclegan/pretrained_models/NAME.pth, pix2pix/models-pytorch/NAME.pth).
# IMG2IMG_DOWNLOAD_TIMEOUT (seconds, default 20) bounds the wait for a server that does not answer.

DOWNLOAD_BASE=${IMG2IMG_DOWNLOAD_BASE:-http://efrosgans.eecs.berkeley.edu}
DOWNLOAD_BASE=${DOWNLOAD_BASE%/}
DOWNLOAD_TIMEOUT=${IMG2IMG_DOWNLOAD_TIMEOUT:-20}
PYTHON=${PYTHON:-python3}

die() {
  echo "error: $*" >&2
  exit 1
}

complain() {  # like die, but returns 1: for checks whose caller cleans up
  echo "error: $*" >&2
  return 1
}

# check_name NAME "KIND" LIST...: exit with the list of valid names unless NAME is one of them.
check_name() {
  local name=$1 kind=$2
  shift 2
  local valid
  for valid in "$@"; do
    [ "$name" = "$valid" ] && return 0
  done
  echo "Available $kind are: $*" >&2
  [ -n "$name" ] && die "'$name' is not one of the available $kind."
  die "name one of the available $kind, e.g. $(basename "$0") $1"
}

# fetch URL DEST: download to DEST.part, then rename, so an interrupted download leaves no DEST.
fetch() {
  local url=$1 dest=$2 reason status
  mkdir -p "$(dirname "$dest")"
  echo "downloading $url"
  if command -v curl >/dev/null 2>&1; then
    reason=$(curl -fsSL --connect-timeout "$DOWNLOAD_TIMEOUT" --retry 2 --retry-delay 1 -o "$dest.part" "$url" 2>&1)
    status=$?
  elif command -v wget >/dev/null 2>&1; then
    reason=$(wget -nv -T "$DOWNLOAD_TIMEOUT" -t 3 -O "$dest.part" "$url" 2>&1)
    status=$?
  else
    die "neither curl nor wget is installed; install one, or download $url by hand and put it at $dest."
  fi
  if [ "$status" -ne 0 ] || [ ! -s "$dest.part" ]; then
    rm -f "$dest.part"
    reason=$(echo "$reason" | tr '\n' ' ' | sed 's/  */ /g')
    die "could not download $url (${reason:-no data}). This machine may be offline, or the server is down." \
        "On a machine with internet access download that file and put it at $dest (then run this script again)," \
        "or set IMG2IMG_DOWNLOAD_BASE to a mirror (now $DOWNLOAD_BASE)."
  fi
  mv "$dest.part" "$dest"
}

# check_top_level ARCHIVE TOP: every entry listed on stdin must lie inside the folder TOP/.
check_top_level() {
  local archive=$1 top=$2 bad
  bad=$(sed 's|^\./||' | grep -v -e "^$top/" -e "^$top\$" -e '^$' | head -3)
  [ -z "$bad" ] || complain "$archive does not hold a single '$top/' folder (found e.g. $(echo $bad));" \
                            "it is not the expected archive."
}

# The verify_* functions print what is wrong and return 1; the caller deletes the file.

# verify_zip ZIP TOP: CRC check of every member and the expected top-level folder.
verify_zip() {
  local zip=$1 top=$2
  if command -v unzip >/dev/null 2>&1; then
    unzip -tq "$zip" >/dev/null 2>&1 || { complain "$zip is not an intact zip archive (unzip -t failed)."; return 1; }
    unzip -Z1 "$zip" | check_top_level "$zip" "$top"
  else
    "$PYTHON" -m zipfile -t "$zip" >/dev/null 2>&1 || { complain "$zip is not an intact zip archive."; return 1; }
    "$PYTHON" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$zip" \
      | check_top_level "$zip" "$top"
  fi
}

# unpack_zip ZIP DIR
unpack_zip() {
  if command -v unzip >/dev/null 2>&1; then
    unzip -q -o "$1" -d "$2"
  else
    "$PYTHON" -m zipfile -e "$1" "$2"
  fi
}

# verify_tar TGZ TOP: reading the whole gzip stream checks its CRC; then the top-level folder.
verify_tar() {
  local tgz=$1 top=$2 listing
  listing=$(tar -tzf "$tgz" 2>/dev/null) || { complain "$tgz is not an intact .tar.gz archive (tar -tzf failed)."; return 1; }
  echo "$listing" | check_top_level "$tgz" "$top"
}

# verify_pth FILE: a PyTorch checkpoint starts as a zip (torch >= 1.6) or a pickle (older).
verify_pth() {
  local file=$1 magic
  magic=$(head -c 2 "$file" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    504b|8002) return 0 ;;  # "PK" (zip) or pickle protocol 2
    *) complain "$file is not a PyTorch checkpoint (it starts with the bytes $magic, perhaps an error page)." ;;
  esac
}

# rejected FILE: delete a download that failed verification and stop.
rejected() {
  rm -f "$1"
  die "deleted $1. The server (IMG2IMG_DOWNLOAD_BASE=$DOWNLOAD_BASE) sent something else than expected;" \
      "run this script again later, or use another mirror."
}
