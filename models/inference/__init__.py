"""How a trained generator is applied, the one way every entry point applies it.

    application.py       inference_views: the generators as test.py, validation and the Translator call them
    windows.py           inputs larger than a generator sees at once, in blended windows (2-D and 3-D)
    translator.py        Translator: load a run, translate images or volumes from your own program
    records.py           what a Translator holds: LoadedGenerator, RunSettings, and each call's CallOptions
    pictures.py, volumes.py    what the Translator takes and gives for each kind of input
    exact/               the exact executor: any size in bounded memory, every norm over the whole input
    large_pictures.py, held_pictures.py    picture files too large to hold as float32, translated by regions
    saved_generator.py   finding a run's weights and building their network without flags
    reference_encoder.py, latent_codes.py    codes for generators with many answers per input
    serving/             the HTTP server (scripts/serve.py)

It looks down at the models' families (to ask what a model's networks are), networks and losses, and
never at models/training/.
"""
