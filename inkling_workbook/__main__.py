import sys

from inkling_workbook.cli import main

sys.exit(main())
