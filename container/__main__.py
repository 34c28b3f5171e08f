import sys

from vllm_sagemaker.container.cli import main

sys.exit(main())
