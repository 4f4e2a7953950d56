// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

interface IERC20 {
    function transfer(address to, uint256 amount) external returns (bool);
    function transferFrom(address from, address to, uint256 amount) external returns (bool);
}

/// @title gpumesh payment channel
/// @notice One unidirectional channel per (renter, supplier) holding the
/// renter's deposit of `token`, and one lane per lease. The supplier redeems
/// the latest renter-signed cumulative EIP-712 voucher of a lease, all or
/// nothing. The renter's requestClose opens a window in which the supplier
/// may still redeem; after it the renter withdraws the rest. Amounts are
/// gpumesh micros; the token moves micros * scale base units.
contract PaymentChannel {
    struct Channel {
        uint128 balance; // micros not yet redeemed or withdrawn
        uint64 window; // seconds the supplier keeps after a close request
        uint64 closesAt; // 0: open; else redeem refused and withdraw allowed from then
    }

    struct Lane {
        uint64 nonce; // of the last voucher redeemed
        uint128 paid; // cumulative micros redeemed
    }

    bytes32 public constant VOUCHER_TYPEHASH = keccak256(
        "Voucher(address renter,address supplier,bytes32 leaseId,uint64 nonce,uint64 cumAmountMicros,bytes32 voucherHash)"
    );
    uint256 private constant HALF_N = 0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    IERC20 public immutable token;
    uint256 public immutable scale;
    uint64 public immutable minWindow;
    bytes32 public immutable DOMAIN_SEPARATOR;

    mapping(bytes32 => Channel) public channels;
    mapping(bytes32 => mapping(bytes32 => Lane)) public lanes;

    event Deposited(bytes32 indexed id, address indexed renter, address indexed supplier, uint128 micros, uint128 balance, uint64 window);
    event Redeemed(bytes32 indexed id, bytes32 indexed leaseId, uint64 nonce, uint128 cumAmountMicros, uint128 delta, bytes32 voucherHash);
    event CloseRequested(bytes32 indexed id, address indexed by, uint64 closesAt);
    event Withdrawn(bytes32 indexed id, uint128 micros);

    constructor(IERC20 token_, uint256 scale_, uint64 minWindow_) {
        require(scale_ > 0, "scale");
        token = token_;
        scale = scale_;
        minWindow = minWindow_;
        DOMAIN_SEPARATOR = keccak256(
            abi.encode(
                keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"),
                keccak256("gpumesh"),
                keccak256("1"),
                block.chainid,
                address(this)
            )
        );
    }

    function channelId(address renter, address supplier) public pure returns (bytes32) {
        return keccak256(abi.encode(renter, supplier));
    }

    /// @notice The EIP-712 digest a renter signs for a voucher.
    function hashVoucher(address renter, address supplier, bytes32 leaseId, uint64 nonce, uint64 cum, bytes32 voucherHash)
        public
        view
        returns (bytes32)
    {
        bytes32 structHash = keccak256(abi.encode(VOUCHER_TYPEHASH, renter, supplier, leaseId, nonce, cum, voucherHash));
        return keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR, structHash));
    }

    /// @notice Opens or tops up the sender's channel with supplier. The
    /// window may only grow and is at least minWindow; a pending close is
    /// cancelled.
    function deposit(address supplier, uint128 micros, uint64 window) external {
        require(supplier != address(0) && supplier != msg.sender, "supplier");
        bytes32 id = channelId(msg.sender, supplier);
        Channel storage c = channels[id];
        require(window >= minWindow && window >= c.window && window > 0, "window");
        c.balance += micros;
        c.window = window;
        c.closesAt = 0;
        emit Deposited(id, msg.sender, supplier, micros, c.balance, window);
        require(token.transferFrom(msg.sender, address(this), uint256(micros) * scale), "transfer");
    }

    /// @notice The supplier (msg.sender) redeems a renter-signed cumulative
    /// voucher: it is paid cum minus what the lease's lane has paid, all or
    /// nothing.
    function redeem(
        address renter,
        bytes32 leaseId,
        uint64 nonce,
        uint64 cum,
        bytes32 voucherHash,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        bytes32 id = channelId(renter, msg.sender);
        Channel storage c = channels[id];
        require(c.window != 0, "no channel");
        require(c.closesAt == 0 || block.timestamp < c.closesAt, "closed");
        require(uint256(s) <= HALF_N, "signature");
        address signer = ecrecover(hashVoucher(renter, msg.sender, leaseId, nonce, cum, voucherHash), v, r, s);
        require(signer != address(0) && signer == renter, "signature");
        Lane storage l = lanes[id][leaseId];
        require(nonce > l.nonce, "stale voucher");
        require(cum >= l.paid, "amount decreased");
        uint128 delta = cum - l.paid;
        require(delta <= c.balance, "balance");
        l.nonce = nonce;
        l.paid = cum;
        c.balance -= delta;
        emit Redeemed(id, leaseId, nonce, cum, delta, voucherHash);
        if (delta > 0) {
            require(token.transfer(msg.sender, uint256(delta) * scale), "transfer");
        }
    }

    /// @notice The renter starts a close: the supplier keeps the channel's
    /// window to redeem. The supplier closing is cooperative: at once.
    function requestClose(address renter, address supplier) external {
        bytes32 id = channelId(renter, supplier);
        Channel storage c = channels[id];
        require(c.window != 0, "no channel");
        uint64 at;
        if (msg.sender == renter) {
            require(c.closesAt == 0, "closing");
            at = uint64(block.timestamp) + c.window;
        } else if (msg.sender == supplier) {
            require(c.closesAt == 0 || c.closesAt > block.timestamp, "closing");
            at = uint64(block.timestamp);
        } else {
            revert("not a party");
        }
        c.closesAt = at;
        emit CloseRequested(id, msg.sender, at);
    }

    /// @notice The renter takes back the unredeemed rest once the close
    /// window has passed.
    function withdraw(address supplier) external {
        bytes32 id = channelId(msg.sender, supplier);
        Channel storage c = channels[id];
        require(c.window != 0, "no channel");
        require(c.closesAt != 0 && block.timestamp >= c.closesAt, "window open");
        uint128 rest = c.balance;
        c.balance = 0;
        emit Withdrawn(id, rest);
        if (rest > 0) {
            require(token.transfer(msg.sender, uint256(rest) * scale), "transfer");
        }
    }
}
