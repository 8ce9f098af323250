#!/usr/bin/python3
# @TOOL@: emulated by the fabricops lab (docs/lab-ofed.md); the implementation is the emul package
# the lab places in /usr/lib/emulated-hw.
import sys

sys.path.insert(0, "/usr/lib/emulated-hw")
from emul.tools import main

sys.exit(main("@TOOL@", sys.argv[1:]))
