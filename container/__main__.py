import sys

from container.cli import main

sys.exit(main())
