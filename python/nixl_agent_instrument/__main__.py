import sys

from ._launcher import main

sys.exit(main())
