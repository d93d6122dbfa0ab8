"""Lightning rebuilds each DataLoader with its DistributedSampler from the arguments it recorded
while the loader was made; the drop-in, reached first inside Lightning's recording as training
scripts reach it (``hybridload.DataLoader`` in ``train_dataloader``), is rebuilt with its own."""

import os
import textwrap

SCRIPT = textwrap.dedent("""
    import hybridload  # at the top of the script; the drop-in is first reached inside the recording below
    import torch
    from lightning.fabric.utilities.data import _replace_dunder_methods, _update_dataloader
    from torch.utils.data import DataLoader as TorchDataLoader, DistributedSampler

    class Numbers(torch.utils.data.Dataset):
        def __len__(self):
            return 8
        def __getitem__(self, i):
            return i

    with _replace_dunder_methods(TorchDataLoader, "dataset"):  # what Lightning's trainer does around the hook
        made = hybridload.DataLoader(Numbers(), batch_size=2, shuffle=True, num_workers=1, distribute_mode=True)
    rebuilt = _update_dataloader(made, DistributedSampler(Numbers(), num_replicas=2, rank=0))
    print("REBUILT", type(rebuilt).__name__, rebuilt.distribute_mode, rebuilt.num_workers, rebuilt.batch_size)
""")


def test_a_drop_in_rebuilt_by_lightning_keeps_distribute_mode_and_its_workers(zygote):
    proc = zygote.run(code=SCRIPT, cwd=os.getcwd(), env=dict(os.environ), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "REBUILT DataLoader True 1 2" in proc.stdout, proc.stdout + proc.stderr[-2000:]
