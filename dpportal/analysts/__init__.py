"""Analysts: people an owner invites to one dataset with an allotment of its budget, who request
releases that the owner (and, under the two-person rule, a second approver) approves."""
