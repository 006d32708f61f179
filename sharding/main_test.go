package sharding

import (
	"os"
	"testing"

	"github.com/freshread/freshread/internal/harness/testcluster"
)

func TestMain(m *testing.M) { os.Exit(testcluster.Run(m, testcluster.Spec{})) }
