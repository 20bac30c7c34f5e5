"""The autograd graph as walked from the loss (`walk`, iterative: no recursion limit) and which
module call created each node (`attribution`)."""
