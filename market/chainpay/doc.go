// Package chainpay holds what a node needs to settle a lease on an EVM
// chain without linking an Ethereum client: the EIP-712 chain voucher a
// renter's payment key signs beside each gpumesh voucher ([SignVoucher],
// [CheckVoucher]), the [ChainKey] record that binds a peer ID and a
// payment address both ways, and the encrypted key file of the payment
// key ([NewKeyFile], [LoadKeyFile], go-ethereum's keystore version 3).
//
// It uses the secp256k1 library libp2p already links
// (decred/dcrd/dcrec/secp256k1) and Keccak-256 from golang.org/x/crypto,
// so the node's binary barely grows. The contract, and the adapter that
// sends transactions to it, live in the chain module
// (github.com/gpumesh/gpumesh/chain), which checks these digests against
// go-ethereum's EIP-712 encoder and the contract's own hashVoucher.
//
// The scheme (docs/PROTOCOL.md §43):
//
//   - EIP-712 domain {name "gpumesh", version "1", chainId,
//     verifyingContract} ([Domain]).
//   - A chain voucher, Voucher(address renter,address supplier,bytes32
//     leaseId,uint64 nonce,uint64 cumAmountMicros,bytes32 voucherHash),
//     copies the lease ID, nonce and cumulative amount of a gpumesh
//     voucher and commits to the SHA-256 of its envelope.
//   - A ChainKey record is a signed envelope of the peer (domain
//     gpumesh-chainkey-v1) whose payload carries the payment key's
//     EIP-712 signature of ChainKey(bytes peer,address account,uint64
//     createdMs) under the same domain.
//
// A signature is 65 bytes r ‖ s ‖ v, v 27 or 28 and s in the lower half
// of the curve order; any other is refused, as the contract does.
package chainpay
