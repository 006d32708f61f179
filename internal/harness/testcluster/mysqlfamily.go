package testcluster

// Every test package that starts servers through this package may run
// MariaDB and MySQL, whose support a service links by importing
// mysqlfamily: importing it here links it into each of them.
import _ "github.com/freshread/freshread/mysqlfamily"
