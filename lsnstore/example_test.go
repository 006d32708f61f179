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
	lsn, _ := lsnstore.ParseLSN("16/B374D848")
	_ = store.Raise(ctx, []string{"users"}, lsnstore.PositionOf(lsn))

	// A replica monitor publishes the replay positions.
	_ = store.PublishReplay(ctx, map[string]lsnstore.Position{
		"replica-1": lsnstore.PositionOf(lsn + 0x100),
		"replica-2": lsnstore.PositionOf(lsn - 0x100),
	})

	// Before a read, compare the write position of its tables with each
	// replica's replay position.
	need, _ := store.WritePosition(ctx, []string{"users", "orders"})
	replicas, _ := store.ReplayPositions(ctx)
	fmt.Println("read of users waits for", need)
	for _, name := range []string{"replica-1", "replica-2"} {
		fmt.Printf("%s at %v: fresh=%v\n", name, replicas[name], replicas[name].Covers(need))
	}
	other, _ := store.WritePosition(ctx, []string{"orders"})
	fmt.Println("read of orders waits for", other)
	// Output:
	// read of users waits for 16/B374D848
	// replica-1 at 16/B374D948: fresh=true
	// replica-2 at 16/B374D748: fresh=false
	// read of orders waits for 0/0
}

// Positions of MariaDB and MySQL have named lanes, one per GTID domain or
// source: a replica has applied a write when it is ahead in every lane.
func ExamplePosition() {
	write, _ := lsnstore.ParsePosition("0/64+1=0/14")  // domain 0 at 100, domain 1 at 20
	replica, _ := lsnstore.ParsePosition("0/C8+1=0/A") // domain 0 at 200, domain 1 at 10
	fmt.Println(replica.Covers(write))
	fmt.Println(replica.Merge(write))
	fmt.Println(replica.Min(write))
	// Output:
	// false
	// 0/C8+1=0/14
	// 0/64+1=0/A
}
