"""`python -m tg_gguf`: the `tg-llm` command line (see tg_gguf.llm.cli)."""
import sys

from tg_gguf.llm.cli import main

sys.exit(main())
