package reshardload

import "gorm.io/gorm"

// Order is a row of the sharded table orders (by user_id); its ID is
// minted by the sharding plugin's IDGenerator, so it embeds the bucket.
type Order struct {
	ID      int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID  int64 `gorm:"index"`
	Amount  int64
	Version int64
	Note    string
}

// TableName implements gorm's Tabler.
func (Order) TableName() string { return "orders" }

// Item is a row of the sharded table order_items, written in the same
// transaction as its order.
type Item struct {
	ID      int64 `gorm:"primaryKey;autoIncrement:false"`
	OrderID int64 `gorm:"index"`
	UserID  int64 `gorm:"index"`
	Sku     string
}

// TableName implements gorm's Tabler.
func (Item) TableName() string { return "order_items" }

// Migrate creates the two tables on a shard database.
func Migrate(db *gorm.DB) error { return db.AutoMigrate(&Order{}, &Item{}) }
