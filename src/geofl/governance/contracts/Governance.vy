# pragma version ~=0.4.3
# pragma evm-version shanghai
"""
@title geofl governance ledger
@notice On-chain half of the governance layer of paper 000 (§3.5): roles bound to
        accounts, rule commitments, per-round aggregation commitments, committee
        records, and node permission states that change only through proposals
        <node, old, new, reason, round_id> (Eq. 24) approved by a strict majority of
        the current committee. Training stays off-chain; only hashes and decisions
        are recorded. Compiled for Shanghai so that it runs on py-evm and ganache 7.
"""

# Roles are bit flags; an account may hold several.
ROLE_COORDINATOR: constant(uint8) = 1
ROLE_TRAINING: constant(uint8) = 2
ROLE_VALIDATION: constant(uint8) = 4
ROLE_AUDIT: constant(uint8) = 8
ROLE_ALL: constant(uint8) = 15

# Permission states; the zero value is the default of every node.
ACTIVE: constant(uint8) = 0
WATCHLIST: constant(uint8) = 1
SUSPENDED: constant(uint8) = 2
REMOVED: constant(uint8) = 3

# Proposal status.
PENDING: constant(uint8) = 1
EXECUTED: constant(uint8) = 2
CANCELLED: constant(uint8) = 3

MAX_COMMITTEE: constant(uint256) = 32


struct Rule:
    ruleHash: bytes32
    label: String[128]
    blockNumber: uint256


struct Aggregation:
    modelHash: bytes32
    updateSetHash: bytes32
    ruleIndex: uint256
    blockNumber: uint256


struct Committee:
    roundId: uint256
    members: DynArray[address, MAX_COMMITTEE]
    seed: bytes32
    blockNumber: uint256


struct Proposal:
    node: address
    oldState: uint8
    newState: uint8
    reason: String[256]
    roundId: uint256
    electionId: uint256
    proposer: address
    approvals: uint256
    status: uint8


event RoleGranted:
    account: indexed(address)
    role: uint8
    roles: uint8
    nodeId: String[64]


event RoleRevoked:
    account: indexed(address)
    role: uint8
    roles: uint8


event RuleCommitted:
    index: indexed(uint256)
    ruleHash: bytes32
    label: String[128]


event AggregationCommitted:
    roundId: indexed(uint256)
    modelHash: bytes32
    updateSetHash: bytes32
    ruleIndex: uint256


event CommitteeElected:
    electionId: indexed(uint256)
    roundId: uint256
    members: DynArray[address, MAX_COMMITTEE]
    seed: bytes32


event PermissionProposed:
    proposalId: indexed(uint256)
    node: indexed(address)
    oldState: uint8
    newState: uint8
    reason: String[256]
    roundId: uint256
    electionId: uint256
    proposer: address


event PermissionApproved:
    proposalId: indexed(uint256)
    member: indexed(address)
    approvals: uint256
    needed: uint256


event PermissionChanged:
    proposalId: indexed(uint256)
    node: indexed(address)
    oldState: uint8
    newState: uint8
    roundId: uint256


event ProposalCancelled:
    proposalId: indexed(uint256)
    canceller: indexed(address)


roles: public(HashMap[address, uint8])
nodeIdOf: public(HashMap[address, String[64]])
accountOf: public(HashMap[bytes32, address])
permission: public(HashMap[address, uint8])

ruleCount: public(uint256)
rules: public(HashMap[uint256, Rule])
aggregated: public(HashMap[uint256, bool])
aggregations: public(HashMap[uint256, Aggregation])

currentElection: public(uint256)
committees: public(HashMap[uint256, Committee])

proposalCount: public(uint256)
proposals: public(HashMap[uint256, Proposal])
approved: public(HashMap[uint256, HashMap[address, bool]])


@deploy
def __init__(coordinatorId: String[64]):
    self._grant(msg.sender, ROLE_COORDINATOR, coordinatorId)


@internal
@view
def _only_coordinator():
    assert self.roles[msg.sender] & ROLE_COORDINATOR != 0, "caller is not the coordinator"


@internal
def _grant(account: address, role: uint8, nodeId: String[64]):
    assert account != empty(address), "zero account"
    assert role != 0 and role <= ROLE_ALL, "unknown role"
    assert len(nodeId) > 0, "empty node id"
    key: bytes32 = keccak256(nodeId)
    bound: address = self.accountOf[key]
    assert bound == empty(address) or bound == account, "node id bound to another account"
    current: String[64] = self.nodeIdOf[account]
    assert len(current) == 0 or keccak256(current) == key, "account bound to another node id"
    self.accountOf[key] = account
    self.nodeIdOf[account] = nodeId
    self.roles[account] = self.roles[account] | role
    log RoleGranted(account=account, role=role, roles=self.roles[account], nodeId=nodeId)


@external
def grantRole(account: address, role: uint8, nodeId: String[64]):
    """
    @notice Bind `account` to `nodeId` and add the role flags `role` to it.
    """
    self._only_coordinator()
    self._grant(account, role, nodeId)


@external
def revokeRole(account: address, role: uint8):
    """
    @notice Clear the role flags `role` of `account`.
    """
    self._only_coordinator()
    assert role != 0 and role <= ROLE_ALL, "unknown role"
    assert self.roles[account] & role != 0, "account does not hold the role"
    assert account != msg.sender or role & ROLE_COORDINATOR == 0, "coordinator cannot revoke itself"
    self.roles[account] = self.roles[account] & (ROLE_ALL ^ role)
    log RoleRevoked(account=account, role=role, roles=self.roles[account])


@external
def commitRule(ruleHash: bytes32, label: String[128]) -> uint256:
    """
    @notice Commit the hash of a resolved config plus governance rules.
    @return The 1-based index of the rule.
    """
    self._only_coordinator()
    assert ruleHash != empty(bytes32), "empty rule hash"
    index: uint256 = self.ruleCount + 1
    self.ruleCount = index
    self.rules[index] = Rule(ruleHash=ruleHash, label=label, blockNumber=block.number)
    log RuleCommitted(index=index, ruleHash=ruleHash, label=label)
    return index


@external
def commitAggregation(roundId: uint256, modelHash: bytes32, updateSetHash: bytes32):
    """
    @notice Commit the aggregated model hash and the hash of its update set for a round.
    """
    self._only_coordinator()
    assert self.ruleCount != 0, "no rule committed"
    assert not self.aggregated[roundId], "round already committed"
    assert modelHash != empty(bytes32), "empty model hash"
    self.aggregated[roundId] = True
    self.aggregations[roundId] = Aggregation(
        modelHash=modelHash,
        updateSetHash=updateSetHash,
        ruleIndex=self.ruleCount,
        blockNumber=block.number,
    )
    log AggregationCommitted(
        roundId=roundId, modelHash=modelHash, updateSetHash=updateSetHash, ruleIndex=self.ruleCount
    )


@external
def recordCommittee(
    electionId: uint256, roundId: uint256, members: DynArray[address, MAX_COMMITTEE], seed: bytes32
):
    """
    @notice Record an election's committee; it becomes the current committee.
    @dev Members must hold the validation role and be active or on the watchlist.
    """
    self._only_coordinator()
    assert electionId > self.currentElection, "election id must increase"
    assert len(members) != 0, "empty committee"
    for i: uint256 in range(len(members), bound=MAX_COMMITTEE):
        member: address = members[i]
        assert self.roles[member] & ROLE_VALIDATION != 0, "member lacks the validation role"
        assert self.permission[member] <= WATCHLIST, "member is suspended or removed"
        for j: uint256 in range(i, bound=MAX_COMMITTEE):
            assert members[j] != member, "duplicate committee member"
    self.currentElection = electionId
    self.committees[electionId] = Committee(
        roundId=roundId, members=members, seed=seed, blockNumber=block.number
    )
    log CommitteeElected(electionId=electionId, roundId=roundId, members=members, seed=seed)


@external
@view
def isMember(electionId: uint256, account: address) -> bool:
    """
    @notice Whether `account` sits on the committee of `electionId`.
    """
    for member: address in self.committees[electionId].members:
        if member == account:
            return True
    return False


@external
def propose(
    node: address, oldState: uint8, newState: uint8, reason: String[256], roundId: uint256
) -> uint256:
    """
    @notice Propose <node, old, new, reason, round_id> to the current committee.
    @return The 1-based proposal id.
    """
    assert self.roles[msg.sender] & (ROLE_COORDINATOR | ROLE_AUDIT) != 0, "caller may not propose"
    assert len(self.nodeIdOf[node]) != 0, "unknown node"
    assert newState <= REMOVED, "unknown permission state"
    assert oldState != newState, "old and new state are equal"
    assert self.permission[node] == oldState, "old state does not match the node's state"
    assert self.currentElection != 0, "no committee elected"
    pid: uint256 = self.proposalCount + 1
    self.proposalCount = pid
    self.proposals[pid] = Proposal(
        node=node,
        oldState=oldState,
        newState=newState,
        reason=reason,
        roundId=roundId,
        electionId=self.currentElection,
        proposer=msg.sender,
        approvals=0,
        status=PENDING,
    )
    log PermissionProposed(
        proposalId=pid,
        node=node,
        oldState=oldState,
        newState=newState,
        reason=reason,
        roundId=roundId,
        electionId=self.currentElection,
        proposer=msg.sender,
    )
    return pid


@external
def approve(proposalId: uint256):
    """
    @notice Approve a pending proposal as a member of its committee (one that is not
            suspended or removed). The approval that reaches a strict majority of the
            committee executes it, unless the node's state has changed since the
            proposal (stale proposal: the whole transaction reverts).
    """
    p: Proposal = self.proposals[proposalId]
    assert p.status == PENDING, "proposal is not pending"
    assert p.electionId == self.currentElection, "committee changed since the proposal"
    members: DynArray[address, MAX_COMMITTEE] = self.committees[p.electionId].members
    assert msg.sender in members, "caller is not a member of the current committee"
    assert self.permission[msg.sender] <= WATCHLIST, "caller is suspended or removed"
    assert not self.approved[proposalId][msg.sender], "already approved"
    self.approved[proposalId][msg.sender] = True
    approvals: uint256 = p.approvals + 1
    needed: uint256 = len(members) // 2 + 1
    self.proposals[proposalId].approvals = approvals
    log PermissionApproved(
        proposalId=proposalId, member=msg.sender, approvals=approvals, needed=needed
    )
    if approvals >= needed:
        assert self.permission[p.node] == p.oldState, "stale proposal: node state changed"
        self.permission[p.node] = p.newState
        self.proposals[proposalId].status = EXECUTED
        log PermissionChanged(
            proposalId=proposalId,
            node=p.node,
            oldState=p.oldState,
            newState=p.newState,
            roundId=p.roundId,
        )


@external
def cancel(proposalId: uint256):
    """
    @notice Withdraw a pending proposal (its proposer or the coordinator).
    """
    p: Proposal = self.proposals[proposalId]
    assert p.status == PENDING, "proposal is not pending"
    assert (
        msg.sender == p.proposer or self.roles[msg.sender] & ROLE_COORDINATOR != 0
    ), "caller may not cancel"
    self.proposals[proposalId].status = CANCELLED
    log ProposalCancelled(proposalId=proposalId, canceller=msg.sender)
