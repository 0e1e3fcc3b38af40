set(_lang C)
include(Platform/Windows-Embarcadero)
__embarcadero_language(C)
