// Command testimage builds the container test provider's image
// (internal/harness/testcluster/image/Dockerfile) if the Docker engine does not
// have it, and prints its tag. The tests build it themselves when needed;
// make and .ci/run call this first so the build is timed on its own.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

func main() {
	tag, err := testcluster.BuildTestImage(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(tag)
}
