package classify

// The MySQL tests need TiDB's parser, which mysqlfamily links in a service.
import _ "github.com/freshread/freshread/internal/mysqlclassify"
