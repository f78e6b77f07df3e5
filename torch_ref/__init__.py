"""The PyTorch reference: thin builders over torch's own classes.

Nothing here reimplements torch: optimizers are ``torch.optim`` classes, data
comes through ``torch.utils.data.DataLoader``, parallelism is real DDP. The
reference must be real torch, or parity proves nothing.
"""

__version__ = "0.1.0"
