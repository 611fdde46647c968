"""Two independent jobs on one GPU: each a healthy loop that would fill the GPU alone, started
by launchers of their own (two users' jobs, not two ranks of one), time-sharing the device."""
import multiprocessing

import common
import emugpu

GPUS = 1
EXPECT = {0: "contention"}


def job(args):
    files = common.dataset(args.data, "small", 2000, 96, 96)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    common.model(gpu, share=0.2)
    loader = common.Loader(common.Images(files), batch_size=32, workers=2)
    common.train(gpu, loader, args.seconds, step_seconds=0.06)


def launcher(args):
    """A job's own launcher (its scheduler step, shell or torchrun)."""
    trainer = multiprocessing.get_context("fork").Process(target=job, args=(args,))
    trainer.start()
    trainer.join()


def main(argv=None):
    args = common.arguments(__doc__, argv)
    common.dataset(args.data, "small", 2000, 96, 96)
    common.in_processes(launcher, args, 2)


if __name__ == "__main__":
    main()
