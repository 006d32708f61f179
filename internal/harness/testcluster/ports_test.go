package testcluster

import "testing"

// freePortOn never hands out a port twice: 1,000 draws from the ~12,000
// ports below the ephemeral range would repeat one almost surely if the
// draws were independent.
func TestFreePortNeverTwice(t *testing.T) {
	seen := map[int]bool{}
	for range 1000 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// A port whose lock file another process holds is not reserved: locks
// are per open file, so a second open of the file stands for the other
// process here.
func TestReservePortHeldElsewhere(t *testing.T) {
	p := portsFrom - 1 // never drawn by freePortOn
	f, err := openPortLock(p)
	if err != nil {
		t.Skipf("no lock directory: %v", err)
	}
	defer f.Close()
	if !tryLockFile(f) {
		t.Fatalf("lock of port %d's file is held by another process", p)
	}
	if reservePort(p) {
		t.Fatalf("port %d reserved while another holder has its lock", p)
	}
	f.Close()
	if !reservePort(p) {
		t.Fatalf("port %d not reserved once its other holder let go", p)
	}
	if reservePort(p) {
		t.Fatalf("port %d reserved twice by one process", p)
	}
}
