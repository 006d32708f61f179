package classify_test

import (
	"fmt"

	"github.com/freshread/freshread/classify"
)

func Example() {
	c := classify.New(classify.Config{Dialect: classify.Postgres})
	for _, sql := range []string{
		`SELECT * FROM "users" JOIN orders o ON o.user_id = "users".id WHERE "users".id = $1`,
		`SET statement_timeout TO 1000`,
		`WITH moved AS (DELETE FROM queue RETURNING *) INSERT INTO archive SELECT * FROM moved`,
		`SELECT * FROM jobs FOR UPDATE SKIP LOCKED`,
		`SELECT my_func(1)`,
	} {
		r := c.Classify(sql)
		fmt.Printf("%v reads=%v writes=%v locks=%v reason=%q\n", r.Kind, r.Reads, r.Writes, r.Locks, r.Reason)
	}
	// Output:
	// READ reads=[orders users] writes=[] locks=false reason=""
	// BUFFER reads=[] writes=[] locks=false reason=""
	// WRITE reads=[] writes=[archive queue] locks=false reason=""
	// WRITE reads=[jobs] writes=[] locks=true reason=""
	// WRITE reads=[] writes=[] locks=false reason="unknown function my_func"
}

// A MySQL trigger body is a compound statement; Identifiers lists the
// names it mentions, outside strings and comments.
func ExampleIdentifiers() {
	body := "BEGIN IF NEW.total > 0 THEN INSERT INTO `Audit` (note) VALUES ('orders changed'); END IF; END"
	names, _ := classify.Identifiers(classify.MySQL, body)
	fmt.Println(names)
	// Output:
	// [begin if new total then insert into audit note values end if end]
}
