import sys

from workbench.entry import main

sys.exit(main())
