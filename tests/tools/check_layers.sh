#!/bin/sh
# check_layers.sh - the include rules of adr/0020 (see check_layers.py); run by tests/run.sh.
exec "${PYTHON:-python3}" "$(dirname "$0")/check_layers.py" "$@"
