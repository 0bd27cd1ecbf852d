"""The process layer: worker, launcher, queue, torchrun, cluster back-ends, resume, sweeps, doctor."""
