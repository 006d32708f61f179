//go:build !linux

package workload

import (
	"sync/atomic"
	"time"
)

func sharedVersions(string, int) ([]atomic.Int64, func(), error) {
	return nil, nil, ErrFleetUnsupported
}

func processesCPU([]int) (time.Duration, error) { return 0, ErrFleetUnsupported }
