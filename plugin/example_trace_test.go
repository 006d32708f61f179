package plugin_test

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	_ "github.com/freshread/freshread/freshreadotel" // records the decisions on the spans
)

// A read in a recording span: with freshreadotel imported, the span gets a
// freshread.route event with the routing decision. It needs servers, so it is compiled, not run.
func Example_tracing() {
	var db *gorm.DB // with the plugin installed

	var tp trace.TracerProvider // your SDK's, with its exporter
	ctx, span := tp.Tracer("shop").Start(context.Background(), "load order")
	defer span.End()

	var order struct {
		ID    uint
		Total int
	}
	db.WithContext(ctx).Table("orders").First(&order, 42) // the span records where it went and why
}
