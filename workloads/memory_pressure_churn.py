"""Device memory churning between 60 % and 96 %: activations of variable-length batches
allocated and freed every step or two, the caching allocator near its limit."""
import common
import emugpu

GPUS = 1
EXPECT = {0: "memory_pressure"}


def main(argv=None):
    args = common.arguments(__doc__, argv)
    files = common.dataset(args.data, "small", 2000, 96, 96)
    gpu = emugpu.open_gpu(args.gpu, args.real)
    gpu.alloc(int(0.60 * gpu.memory_total) - gpu.memory_used())
    peak = int(0.36 * gpu.memory_total)
    held = False

    def churn(step):
        nonlocal held
        if step % 12 == 0:
            if held:
                gpu.free(peak)
            else:
                gpu.alloc(peak)
            held = not held

    loader = common.Loader(common.Images(files), batch_size=32, workers=2)
    common.train(gpu, loader, args.seconds, step_seconds=0.06, on_step=churn)


if __name__ == "__main__":
    main()
