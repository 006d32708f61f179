package testcluster

import "context"

func dockerAvailable(ctx context.Context) bool { return false }

func startDockerRedis(ctx context.Context) (redisBackend, error)        { return nil, ErrUnsupported }
func startDockerPostgres(ctx context.Context, n int) (pgBackend, error) { return nil, ErrUnsupported }
func startDockerMariaDB(ctx context.Context) (mariaBackend, error)      { return nil, ErrUnsupported }
