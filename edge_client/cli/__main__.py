import sys

from edge_client.cli import main

sys.exit(main())
