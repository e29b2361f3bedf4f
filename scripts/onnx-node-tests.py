"""Writes the official ONNX backend node tests from the installed `onnx` package, offline:
OUT/node/<test>/model.onnx and test_data_set_0/{input,output}_N.pb, about 1,900 tests
(~60 MB, seconds). The package generates them from its own test cases
(`onnx.backend.test.case.node`); its writer (`cmd_tools.generate_data`) is asked to write
those node cases in place of the model cases it writes by default.

  python3 -m pip install onnx==1.23.2 numpy
  python3 scripts/onnx-node-tests.py OUT
"""
import argparse
import sys

from onnx.backend.test import cmd_tools
from onnx.backend.test.case import node

if len(sys.argv) != 2:
    sys.exit(__doc__)
cases = node.collect_testcases()
cmd_tools.model_test.collect_testcases = lambda: cases
cmd_tools.generate_data(argparse.Namespace(output=sys.argv[1]))
print(f"{len(cases)} node tests written under {sys.argv[1]}")
