package plugin_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// The README's quick start. It needs servers, so it is compiled, not run.
func Example_quickStart() {
	db, err := gorm.Open(postgres.Open("postgres://app@primary/shop"), &gorm.Config{})
	if err != nil {
		panic(err)
	}
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"localhost:6379"}, ContextTimeoutEnabled: true})
	p := plugin.New(plugin.Config{
		Replicas: []plugin.Replica{
			{Name: "r1", Dialector: postgres.Open("postgres://app@replica1/shop")},
			{Name: "r2", Dialector: postgres.Open("postgres://app@replica2/shop")},
		},
		Store: lsnstore.NewRedis(rdb, lsnstore.RedisOptions{Database: "shop"}), // nil: in-memory, one process
	})
	if err := db.Use(p); err != nil {
		panic(err)
	}
	defer p.Close() // stops the poller and closes the replicas' pools
}

// Read-your-writes across requests: wrap the HTTP handler; the session
// travels in a cookie (or the X-Freshread-Session header).
func ExampleMiddleware() {
	mux := http.NewServeMux()
	handler := plugin.Middleware(plugin.MiddlewareConfig{})(mux)
	_ = handler
	fmt.Println("ok")
	// Output: ok
}

// A session token holds positions only; a malformed one is an error that
// names the problem.
func ExampleParseToken() {
	s, err := plugin.ParseToken("v1.7312345678901234567=16/B374D848")
	fmt.Println(s.Token(), err)
	_, err = plugin.ParseToken("v1.7312345678901234567=zz")
	fmt.Println(err)
	ctx := plugin.ContextWithSession(context.Background(), s)
	fmt.Println(plugin.SessionFrom(ctx) == s)
	// Output:
	// v1.7312345678901234567=16/B374D848 <nil>
	// plugin: malformed session token: lsnstore: unparseable position "zz"
	// true
}
