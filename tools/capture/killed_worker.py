"""The case both capture scripts share: a DataLoader worker killed by SIGKILL mid-epoch,
which the main process reports as "DataLoader worker (pid N) is killed by signal: Killed"."""
import os

import torch


class _Dataset(torch.utils.data.Dataset):
    def __len__(self):
        return 100

    def __getitem__(self, i):
        if i == 3:
            os.kill(os.getpid(), 9)
        return torch.zeros(4)


def run():
    for _batch in torch.utils.data.DataLoader(_Dataset(), num_workers=2, batch_size=2):
        pass
