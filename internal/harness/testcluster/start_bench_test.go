package testcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

// BenchmarkStartServers measures what a test pays for a server group of
// its own: each op starts one (the shared groups of TestMain are not used)
// and closes it; the time to close is reported apart. The provider is the
// one the environment selects (FRESHREAD_DOCKER=0 local processes, =1
// containers):
//
//	FRESHREAD_DOCKER=1 go test -run '^$' -bench StartServers -benchtime 5x ./internal/testcluster/
func BenchmarkStartServers(b *testing.B) {
	type closer interface{ Close() error }
	groups := []struct {
		name  string
		start func(context.Context) (closer, error)
	}{
		{"postgres-primary+2", func(ctx context.Context) (closer, error) { return testcluster.StartPostgres(ctx, 2) }},
		{"mariadb-primary+1", func(ctx context.Context) (closer, error) { return testcluster.StartMariaDB(ctx) }},
		{"redis", func(ctx context.Context) (closer, error) { return testcluster.NewRedis(ctx) }},
	}
	for _, g := range groups {
		b.Run(g.name, func(b *testing.B) {
			var closing time.Duration
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				c, err := g.start(ctx)
				cancel()
				if err != nil {
					if testcluster.Required() {
						b.Fatal(err)
					}
					b.Skip(err)
				}
				b.StopTimer()
				t0 := time.Now()
				if err := c.Close(); err != nil {
					b.Fatal(err)
				}
				closing += time.Since(t0)
				b.StartTimer()
			}
			b.ReportMetric(float64(closing.Milliseconds())/float64(b.N), "close-ms/op")
		})
	}
}
