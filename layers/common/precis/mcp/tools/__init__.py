"""The tools, registered in the order tools/list gives them (Honcho's: workspaces, peers, sessions, then conclusions
and the system), each family's own additions of Precis's after Honcho's."""

# One import a family, in that order: importing a module registers its tools (so the order is not alphabetical).
from precis.mcp.catalogue import CATALOGUE
from precis.mcp.tools import workspaces  # noqa: F401
from precis.mcp.tools import peers  # noqa: F401
from precis.mcp.tools import sessions  # noqa: F401
from precis.mcp.tools import derived  # noqa: F401

__all__ = ["CATALOGUE"]
