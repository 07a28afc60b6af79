"""Who may see and do what: the permission rules, API tokens and invitations, sign-in limits
and the times non-owners may see."""
