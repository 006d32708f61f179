// Package containers is the nested module that holds the test harness's
// Docker dependencies (testcontainers-go and the Docker client), so that
// they stay out of the go.sum of a service importing freshread. Its one
// program, cmd/frcontainers, performs the Docker operations of the
// container provider of internal/harness/testcluster, which talks to it
// through JSON lines on its standard input and output.
package containers
