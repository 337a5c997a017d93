#!/bin/sh
# make bench: flashd against nbdkit (memory, null) and qemu-nbd, one run.
exec /usr/bin/python3 "$(dirname "$0")/bench.py" "$@"
