module github.com/softrnic/softrnic

go 1.26.3

require (
	github.com/cilium/ebpf v0.22.0
	github.com/google/gopacket v1.1.19
	github.com/safchain/ethtool v0.7.0
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	golang.org/x/net v0.52.0
	golang.org/x/sys v0.49.0
	gvisor.dev/gvisor v0.0.0-20260905035102-160fafc42237
)

require (
	github.com/google/btree v1.1.2 // indirect
	golang.org/x/exp v0.0.0-20250711185948-6ae5c78190dc // indirect
	golang.org/x/time v0.15.0 // indirect
)
