package rnic

import "testing"

// TestConfigLocalIP: LocalAddr wins; else Interface's first address, IPv4 first; else "".
func TestConfigLocalIP(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{LocalAddr: "192.0.2.7", Interface: "lo"}, "192.0.2.7"},
		{Config{Interface: "lo"}, "127.0.0.1"},
		{Config{Interface: "no-such-if0"}, ""},
		{Config{}, ""},
	} {
		if got := tc.c.LocalIP(); got != tc.want {
			t.Errorf("%+v.LocalIP() = %q, want %q", tc.c, got, tc.want)
		}
	}
}
