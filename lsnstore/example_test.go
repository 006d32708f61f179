package lsnstore_test

import (
	"context"
	"fmt"

	"github.com/freshread/freshread/lsnstore"
)

func Example() {
	ctx := context.Background()
	store := lsnstore.NewMemory()

	// After a write to users, the plugin raises the position of users to
	// pg_current_wal_lsn().
	pos, _ := lsnstore.ParseLSN("16/B374D848")
	_ = store.Raise(ctx, []string{"users"}, pos)

	// A replica monitor publishes the replay positions.
	_ = store.PublishReplay(ctx, map[string]lsnstore.LSN{
		"replica-1": pos + 0x100,
		"replica-2": pos - 0x100,
	})

	// Before a read, compare the write position of its tables with each
	// replica's replay position.
	need, _ := store.WritePosition(ctx, []string{"users", "orders"})
	replicas, _ := store.ReplayPositions(ctx)
	fmt.Println("read of users waits for", need)
	for _, name := range []string{"replica-1", "replica-2"} {
		fmt.Printf("%s at %v: fresh=%v\n", name, replicas[name], replicas[name] >= need)
	}
	other, _ := store.WritePosition(ctx, []string{"orders"})
	fmt.Println("read of orders waits for", other)
	// Output:
	// read of users waits for 16/B374D848
	// replica-1 at 16/B374D948: fresh=true
	// replica-2 at 16/B374D748: fresh=false
	// read of orders waits for 0/0
}
