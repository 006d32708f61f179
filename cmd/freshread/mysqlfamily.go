package main

// The command classifies MySQL statements and runs MariaDB shards.
import _ "github.com/freshread/freshread/mysqlfamily"
