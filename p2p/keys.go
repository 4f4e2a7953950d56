package p2p

import (
	"fmt"
	"strings"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"
)

// ProfileKey is the DHT key of a peer's profile: "/gpumesh-profile/" followed
// by the binary peer ID (not its base58 text).
func ProfileKey(id peer.ID) string {
	return "/" + ProfileNamespace + "/" + string(id)
}

// PeerFromProfileKey parses a key made by ProfileKey.
func PeerFromProfileKey(key string) (peer.ID, error) {
	prefix := "/" + ProfileNamespace + "/"
	if !strings.HasPrefix(key, prefix) {
		return "", fmt.Errorf("%w: %q is not in namespace %s", ErrBadKey, key, ProfileNamespace)
	}
	id, err := peer.IDFromBytes([]byte(key[len(prefix):]))
	if err != nil {
		return "", fmt.Errorf("%w: peer id: %v", ErrBadKey, err)
	}
	return id, nil
}

// ModelCID is the content ID under which suppliers of a GPU model announce
// provider records: CIDv1, codec raw (0x55), multihash sha2-256 of
// ModelKeyPrefix + slug.
func ModelCID(slug string) cid.Cid { return rawCID(ModelKeyPrefix + slug) }

// SupplierCID is the content ID under which every supplier with a GPU of
// a known model also announces itself, so that a search for any model
// costs one lookup, not one per model: CIDv1, codec raw, multihash
// sha2-256 of SupplierKey.
func SupplierCID() cid.Cid { return rawCID(SupplierKey) }

func rawCID(preimage string) cid.Cid {
	sum, err := mh.Sum([]byte(preimage), mh.SHA2_256, -1)
	if err != nil {
		// sha2-256 is always available; an error here is a programming bug.
		panic(fmt.Sprintf("p2p: sha2-256 multihash: %v", err))
	}
	return cid.NewCidV1(cid.Raw, sum)
}
