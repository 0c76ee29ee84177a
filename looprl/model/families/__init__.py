"The families looprl ships, registered in this order (Huginn first: the default). Each module declares one `Family`."
from ..registry import register
from . import huginn, ouro, nanbeige, hrm_text

for _module in (huginn, ouro, nanbeige, hrm_text): register(_module.FAMILY)
