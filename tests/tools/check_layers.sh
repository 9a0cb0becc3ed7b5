#!/bin/sh
# check_layers.sh - the layout rules of adr/0020 and adr/0040 (folders are layers, no
# circle between files, the 1,000-line bound; see check_layers.py). Same arguments.
exec "${PYTHON:-python3}" "$(dirname "$0")/check_layers.py" "$@"
