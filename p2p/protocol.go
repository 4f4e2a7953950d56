package p2p

import (
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
)

// Protocol identifiers and record parameters. Changing any of these is a
// wire change: bump the version in the identifier and document it in
// docs/PROTOCOL.md.
const (
	// ProtocolPrefix scopes the DHT so gpumesh forms its own network:
	// the Kademlia protocol is ProtocolPrefix + "/kad/1.0.0".
	ProtocolPrefix protocol.ID = "/gpumesh"

	// HeartbeatTopic is the GossipSub topic of signed node heartbeats.
	HeartbeatTopic = "/gpumesh/heartbeat/2.0.0"

	// ProfileNamespace is the DHT record namespace of supplier profiles:
	// a profile key is "/" + ProfileNamespace + "/" + <binary peer ID>.
	ProfileNamespace = "gpumesh-profile"

	// ModelKeyPrefix is hashed with a model slug to form the CID under
	// which suppliers of that model announce provider records.
	ModelKeyPrefix = "gpumesh/model/v1/"

	// SupplierKey is hashed to form the CID under which every supplier
	// announces itself, whatever its models.
	SupplierKey = "gpumesh/supplier/v1"

	// Signed-envelope domains, one per record type.
	ProfileDomain   = "gpumesh-profile-v1"
	HeartbeatDomain = "gpumesh-heartbeat-v1"

	// RecordVersion is the schema version carried inside every record.
	RecordVersion = 1

	// MaxProfileSize bounds a signed profile envelope in bytes.
	MaxProfileSize = 16 << 10
	// MaxHeartbeatSize bounds a signed heartbeat envelope in bytes.
	MaxHeartbeatSize = 1 << 10
	// MaxGPUsPerProfile bounds the inventory one profile may claim.
	MaxGPUsPerProfile = 256
	// MaxAddrsPerProfile bounds the addresses one profile may list.
	MaxAddrsPerProfile = 32
	// MaxProfileLifetime bounds expires_at - issued_at.
	MaxProfileLifetime = 48 * time.Hour
	// ClockSkew is how far in the future a record's timestamp may be.
	ClockSkew = 30 * time.Second
	// MaxHeartbeatAge is how old a heartbeat may be and still be accepted.
	MaxHeartbeatAge = 2 * time.Minute
	// MaxTextField bounds free-form strings (region, software, names).
	MaxTextField = 128
	// MaxNVLinks bounds a GPU's NVLink links (NVML's NVLINK_MAX_LINKS).
	MaxNVLinks = 36
)

// Multicodec-style payload types written into each envelope.
var (
	profilePayloadType   = []byte("/gpumesh/profile/1")
	heartbeatPayloadType = []byte("/gpumesh/heartbeat/1")
)
