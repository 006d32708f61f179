package mysqlfamily_test

import (
	"testing"

	"github.com/freshread/freshread/classify"
	"github.com/freshread/freshread/internal/engines"
	_ "github.com/freshread/freshread/mysqlfamily"
)

func TestLinked(t *testing.T) {
	if !engines.MySQLFamilyLinked() {
		t.Fatal("mysqlfamily links no MySQL/MariaDB support")
	}
	r := classify.New(classify.Config{Dialect: classify.MySQL}).Classify("SELECT * FROM t WHERE id = 1 FOR UPDATE")
	if r.Kind != classify.Write || !r.Locks || len(r.Reads) != 1 || r.Reads[0] != "t" {
		t.Fatalf("classified with mysqlfamily: %+v", r)
	}
}
