import sys

from workbench.cli.entry import main

sys.exit(main())
