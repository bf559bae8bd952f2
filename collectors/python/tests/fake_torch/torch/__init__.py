"""A stand-in for torch with just what memscope_agent touches, for tests on machines without a GPU
(the agent runs against real torch on the GPU host through the device tool). The state lives in
``torch.cuda.fake`` so a test can change it and fire the OOM observer."""

from . import cuda, _C  # noqa: F401
