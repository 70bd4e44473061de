package dat

// transport is the connection side of a provider (spec §6.4): it listens on
// connection qualifiers and establishes connections for Endpoints. The iWARP
// implementation maps a connection qualifier to a TCP port, as OFA DAPL's
// cma provider does.
type transport interface {
	close()
}
