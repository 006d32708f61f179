package position_test

import (
	"fmt"

	"github.com/freshread/freshread/position"
)

// A write position is compared with what a replica has applied, and a
// stored position is raised by merging, never by comparing strings.
func Example() {
	write, _ := position.ParseMariaDBGTIDList("1-2-50,0-1-100")
	replica, _ := position.ParseMariaDBGTIDList("0-1-120,1-2-49")
	fmt.Println(write, replica.HasApplied(write), replica.Merge(write))

	executed, _ := position.ParseMySQLGTIDSet("3E11FA47-71CA-11E1-9E33-C80AA9429562:1-100:200-300,\n" +
		"8a94f357-aab4-11df-86ab-c80aa9429563:batch:1-5")
	commit, _ := position.ParseMySQLGTIDSet("3e11fa47-71ca-11e1-9e33-c80aa9429562:150")
	fmt.Println(executed.Contains(commit))
	fmt.Println(executed.Union(commit))

	_, err := position.ParseMariaDBGTIDList("0-1")
	fmt.Println(err)
	// Output:
	// 0-1-100,1-2-50 false 0-1-120,1-2-50
	// false
	// 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100:150:200-300,8a94f357-aab4-11df-86ab-c80aa9429563:batch:1-5
	// position: unparseable MariaDB GTID list "0-1": entry "0-1" needs domain-server-seq
}
