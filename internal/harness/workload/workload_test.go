package workload

import (
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	for _, c := range []struct {
		name           string
		in             Options
		engine         string
		delay, maxWait time.Duration
	}{
		{"postgres default", Options{}, Postgres, 50 * time.Millisecond, 100 * time.Millisecond},
		{"postgres 20ms", Options{Delay: 20 * time.Millisecond}, Postgres, 20 * time.Millisecond, 100 * time.Millisecond},
		{"postgres none", Options{Delay: -1}, Postgres, 0, 100 * time.Millisecond},
		{"postgres 100ms", Options{Delay: 100 * time.Millisecond}, Postgres, 100 * time.Millisecond, 200 * time.Millisecond},
		{"mariadb default", Options{Engine: MariaDB}, MariaDB, time.Second, 2 * time.Second},
		{"mariadb none", Options{Engine: MariaDB, Delay: -1}, MariaDB, 0, 100 * time.Millisecond},
		{"explicit max wait", Options{Engine: MariaDB, MaxWait: 3 * time.Second}, MariaDB, time.Second, 3 * time.Second},
	} {
		o := c.in.WithDefaults()
		if o.Engine != c.engine || o.Delay != c.delay || o.MaxWait != c.maxWait {
			t.Errorf("%s: engine %q delay %v max wait %v, want %q %v %v", c.name, o.Engine, o.Delay, o.MaxWait, c.engine, c.delay, c.maxWait)
		}
	}
}

func TestMariaDBSeedSQL(t *testing.T) {
	q := mariaCluster{}.seedSQL("rows_0", 3)
	if len(q) != 2 || q[1] != "INSERT INTO rows_0 (id) VALUES (1), (2), (3)" {
		t.Fatalf("seed SQL %q", q)
	}
}

func TestUnknownEngine(t *testing.T) {
	if _, err := openCluster("oracle"); err == nil {
		t.Fatal("openCluster(oracle): no error")
	}
}
