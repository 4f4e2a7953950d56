// Package p2p is gpumesh's networking layer: the libp2p host (TCP and QUIC,
// Noise, yamux, resource and connection managers, a ban-list gater), the
// Kademlia DHT under gpumesh's own protocol prefix, GossipSub with strict
// signing and peer scoring, and the signed, versioned records that travel
// over them together with their validators, and the directory
// (directory.go) from which a full node answers a light client's search
// with the profiles it keeps, each one checked again by the asker.
//
// Every record is a protobuf message (package pb) carried as the payload of
// a libp2p signed envelope. The envelope's domain string differs per record
// type, so a signature over one kind of record can never be replayed as
// another. Validation runs the cheap checks first (size, then the envelope
// signature, then decoding, then the fields), and each failure has a named
// error so callers and logs can say exactly why a record was refused.
//
// A network ID (Config.Network, netid.go) keeps gpumesh networks apart:
// it scopes the DHT and GossipSub protocols and is announced in identify's
// agent version, and a peer found on another network is dropped and
// remembered (WrongNetworkPeers), so that a node bootstrapped into the
// wrong network says so.
//
// The wire formats, DHT key derivations and topics are specified in
// docs/PROTOCOL.md; the constants in protocol.go are the source of truth.
package p2p
