"""loss.item() every step with CUDA's default spin wait: the same loop as
sync_stall_item_blocking, but the main thread stays on its core while it waits."""
import sync_stall_item_blocking

GPUS = 1
EXPECT = {0: "sync_stall"}

if __name__ == "__main__":
    sync_stall_item_blocking.main(sync="spin")
