"""The parts of examples/torch_worker.py, a PyTorch decoder behind fairsched:

* model.py: ModelConfig and Model, the transformer and its pooled KV cache;
* engine.py: Engine, continuous batching over the model's KV slots;
* loop.py: serve(), the fairsched worker loop, and run_standalone();
* bench.py: --bench and its client process (--bench-client).

examples/torch_worker.py is the command line; it puts python/ (the package
from this checkout or the GPU kit) on sys.path before importing these.
"""
