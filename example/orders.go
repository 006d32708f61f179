package example

import (
	"context"

	"gorm.io/gorm"
)

// Order is one order of a user.
type Order struct {
	ID     uint `gorm:"primaryKey"`
	UserID uint `gorm:"index"`
	Status string
}

// Product is a table the order flow only reads.
type Product struct {
	ID   uint `gorm:"primaryKey"`
	Name string
}

// Service is the order service.
type Service struct {
	DB *gorm.DB
}

// Migrate creates the tables.
func (s *Service) Migrate(ctx context.Context) error {
	return s.DB.WithContext(ctx).AutoMigrate(&Order{}, &Product{})
}

// PlaceOrder creates an order.
func (s *Service) PlaceOrder(ctx context.Context, userID uint) (Order, error) {
	o := Order{UserID: userID, Status: "placed"}
	err := s.DB.WithContext(ctx).Create(&o).Error
	return o, err
}

// SetStatus changes an order's status.
func (s *Service) SetStatus(ctx context.Context, id uint, status string) error {
	return s.DB.WithContext(ctx).Model(&Order{ID: id}).Update("status", status).Error
}

// Served is a value read together with the port of the server that sent it.
type Served struct {
	Value string
	Port  int
}

// OrderStatus reads an order's status and the answering server's port
// (inet_server_port(), in the same statement).
func (s *Service) OrderStatus(ctx context.Context, id uint) (Served, error) {
	var r struct {
		Status string
		Port   int
	}
	err := s.DB.WithContext(ctx).Model(&Order{}).Select("status, inet_server_port() AS port").
		Where("id = ?", id).Scan(&r).Error
	return Served{Value: r.Status, Port: r.Port}, err
}

// ProductName reads a product's name and the answering server's port.
func (s *Service) ProductName(ctx context.Context, id uint) (Served, error) {
	var r struct {
		Name string
		Port int
	}
	err := s.DB.WithContext(ctx).Model(&Product{}).Select("name, inet_server_port() AS port").
		Where("id = ?", id).Scan(&r).Error
	return Served{Value: r.Name, Port: r.Port}, err
}
