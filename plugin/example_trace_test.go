package plugin_test

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/freshread/freshread/freshreadotel"
	"github.com/freshread/freshread/lsnstore"
	"github.com/freshread/freshread/plugin"
)

// A read in a recording span: with Config.Tracer set to freshreadotel's,
// the span gets a freshread.route event with the routing decision. It
// needs servers, so it is compiled, not run.
func Example_tracing() {
	var db *gorm.DB // opened on the primary
	var store lsnstore.Store
	var replicas []plugin.Replica

	_ = db.Use(plugin.New(plugin.Config{
		Replicas: replicas,
		Store:    store,
		Tracer:   freshreadotel.Tracer(), // routing decisions as span events
	}))

	var tp trace.TracerProvider // your SDK's, with its exporter
	ctx, span := tp.Tracer("shop").Start(context.Background(), "load order")
	defer span.End()

	var order struct {
		ID    uint
		Total int
	}
	db.WithContext(ctx).Table("orders").First(&order, 42) // the span records where it went and why
}
