#!/usr/bin/env bash
# The reference's command, kept where its users type it: bash ./datasets/download_pix2pix_dataset.sh NAME
# (the script itself is scripts/download_pix2pix_dataset.sh; the data goes to ./datasets/NAME).
exec bash "$(dirname "$0")/../scripts/download_pix2pix_dataset.sh" "$@"
